"""Crowd rankers against second, straightforward implementations (loops, dense algebra, cleanlab).

The data mix everything a benchmark holds: hard answers, option probabilities, answers naming no
option, missing answers and items with three options among items with four.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from cleanlab.rank import get_label_quality_scores

from app.stats import crowd_rankers as cr
from app.stats import label_errors as le

N, M, K = 120, 6, 4


def _data(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Coded answers (n, m), probabilities (n, m, K) NaN where absent, labels, option counts."""
    rng = np.random.default_rng(seed)
    n_options = np.where(rng.random(N) < 0.2, 3, 4)
    truth = rng.integers(0, 3, N)
    labels = np.where(rng.random(N) < 0.15, (truth + 1) % 3, truth)
    skill = np.linspace(0.45, 0.9, M)
    codes = np.empty((N, M), dtype=np.int64)
    for i in range(N):
        for j in range(M):
            right = rng.random() < skill[j]
            codes[i, j] = truth[i] if right else rng.integers(0, n_options[i])
    codes[rng.random((N, M)) < 0.05] = -2
    codes[rng.random((N, M)) < 0.08] = -1
    probs = np.full((N, M, K), np.nan)
    for j in (1, 4):  # two models give probabilities where they answered with an option
        for i in range(N):
            if codes[i, j] >= 0:
                p = rng.dirichlet(np.ones(n_options[i]))
                probs[i, j, : n_options[i]] = p
                probs[i, j, n_options[i] :] = 0.0
    return codes, probs, labels, n_options


def _vote(codes: np.ndarray, probs: np.ndarray, i: int, j: int) -> list[float] | None:
    """Model j's vote on item i written out: None (no answer), probabilities, or one-hot."""
    if not np.isnan(probs[i, j]).any():
        return [float(v) for v in probs[i, j]]
    if codes[i, j] == -1:
        return None
    return [1.0 if codes[i, j] == k else 0.0 for k in range(K)]


def test_soft_votes_consensus_and_plurality_share_against_loops() -> None:
    codes, probs, labels, _ = _data()
    sv = cr.soft_votes(codes, probs, K)
    consensus = cr.soft_consensus(sv, labels)
    share = cr.against_share(sv, labels)
    for i in range(N):
        votes = [_vote(codes, probs, i, j) for j in range(M)]
        given = [v for v in votes if v is not None]
        support = sum(v[labels[i]] for v in given)
        assert consensus[i] == pytest.approx(1 - support / len(given), abs=1e-12)
        others = [sum(v[k] for v in given) for k in range(K) if k != labels[i]]
        assert share[i] == pytest.approx(max(others) / len(given), abs=1e-12)
    # With hard answers only, the soft consensus is the plain one, the share read off the codes.
    hard = cr.soft_votes(codes, None, K)
    consensus_hard, share_hard = cr.hard_consensus(codes, labels, K)
    np.testing.assert_allclose(share_hard, cr.against_share(hard, labels), atol=1e-12)
    np.testing.assert_array_equal(consensus_hard, le.consensus_scores(codes, labels, K))
    ok = (codes != -1).any(axis=1)
    np.testing.assert_allclose(
        cr.soft_consensus(hard, labels)[ok], le.consensus_scores(codes, labels, K)[ok], atol=1e-12
    )


def test_tie_break_orders_ties_only_and_keeps_scores_in_the_unit_interval() -> None:
    rng = np.random.default_rng(1)
    primary = rng.integers(0, 8, 500) / 7
    secondary = rng.random(500)
    broken = cr.tie_break(primary, secondary)
    want = np.lexsort((secondary, primary))
    np.testing.assert_array_equal(np.argsort(broken, kind="stable"), want)
    assert np.abs(broken - primary).max() <= cr.TIE_STEP_CAP
    assert broken.min() >= 0.0 and broken.max() <= 1.0


def _ds_loops(
    codes: np.ndarray, probs: np.ndarray, n_options: np.ndarray, iters: int, alpha: float
) -> np.ndarray:
    """Dawid-Skene EM written item by item and model by model."""
    r = K + 1  # the K options, then "no option"

    def obs(i: int, j: int) -> list[float]:
        v = _vote(codes, probs, i, j)
        if v is None:
            return [0.0] * r
        return [*v, 1.0 if codes[i, j] == -2 and np.isnan(probs[i, j]).all() else 0.0]

    o = [[obs(i, j) for j in range(M)] for i in range(N)]
    post = np.zeros((N, K))
    for i in range(N):
        t = [sum(o[i][j][k] for j in range(M)) if k < n_options[i] else 0.0 for k in range(K)]
        if sum(t) == 0:
            t = [1.0 if k < n_options[i] else 0.0 for k in range(K)]
        post[i] = np.array(t) / sum(t)
    for _ in range(iters):
        prior = [sum(post[i, c] for i in range(N)) / N for c in range(K)]
        pi = np.zeros((M, K, r))
        for j in range(M):
            for c in range(K):
                row = [alpha + sum(post[i, c] * o[i][j][x] for i in range(N)) for x in range(r)]
                pi[j, c] = np.array(row) / sum(row)
        new = np.zeros((N, K))
        for i in range(N):
            logs = []
            for c in range(K):
                if c >= n_options[i]:
                    logs.append(-math.inf)
                    continue
                s = math.log(prior[c])
                for j in range(M):
                    s += sum(o[i][j][x] * math.log(pi[j, c, x]) for x in range(r))
                logs.append(s)
            top = max(logs)
            e = [math.exp(v - top) for v in logs]
            new[i] = np.array(e) / sum(e)
        post = new
    return post


def test_dawid_skene_equals_a_loop_implementation_of_em() -> None:
    codes, probs, _labels, n_options = _data(2)
    sv = cr.soft_votes(codes, probs, K)
    post, confusion = cr.dawid_skene(sv, n_options, max_iter=6, tol=0.0)
    want = _ds_loops(codes, probs, n_options, 6, 0.01)
    np.testing.assert_allclose(post, want, atol=1e-9)
    np.testing.assert_allclose(confusion.sum(axis=2), 1.0, atol=1e-12)
    assert (post[n_options == 3, 3] == 0).all()


def _one_coin_loops(
    codes: np.ndarray, probs: np.ndarray, n_options: np.ndarray, iters: int
) -> tuple[np.ndarray, np.ndarray]:
    """One-coin EM from its likelihood written out: right with acc_j, else any other way."""
    votes = [[_vote(codes, probs, i, j) for j in range(M)] for i in range(N)]
    post = np.zeros((N, K))
    for i in range(N):
        t = [
            sum(v[k] for v in votes[i] if v is not None) if k < n_options[i] else 0.0
            for k in range(K)
        ]
        if sum(t) == 0:
            t = [1.0 if k < n_options[i] else 0.0 for k in range(K)]
        post[i] = np.array(t) / sum(t)
    acc = np.zeros(M)
    for _ in range(iters):
        for j in range(M):
            right = sum(
                post[i, c] * votes[i][j][c]
                for i in range(N)
                if votes[i][j] is not None
                for c in range(K)
            )
            seen = sum(votes[i][j] is not None for i in range(N))
            acc[j] = (right + 1) / (seen + 2)
        new = np.zeros((N, K))
        for i in range(N):
            logs = []
            for c in range(K):
                if c >= n_options[i]:
                    logs.append(-math.inf)
                    continue
                s = 0.0
                for j in range(M):
                    v = votes[i][j]
                    if v is None:
                        continue
                    wrong = (1 - acc[j]) / (n_options[i] - 1)
                    # P(vote | truth c): a soft vote is a mixture of answers
                    s += v[c] * math.log(acc[j]) + (1 - v[c]) * math.log(wrong)
                logs.append(s)
            top = max(logs)
            e = [math.exp(x - top) for x in logs]
            new[i] = np.array(e) / sum(e)
        post = new
    return post, acc


def test_one_coin_equals_a_loop_implementation_of_em() -> None:
    codes, probs, _labels, n_options = _data(3)
    sv = cr.soft_votes(codes, probs, K)
    post, acc = cr.one_coin(sv, n_options, max_iter=8, tol=0.0)
    want_post, want_acc = _one_coin_loops(codes, probs, n_options, 8)
    np.testing.assert_allclose(post, want_post, atol=1e-9)
    np.testing.assert_allclose(acc, want_acc, atol=1e-9)
    # The ablest simulated model is estimated ablest.
    assert int(np.argmax(acc)) == M - 1


def test_rasch_equals_a_dense_newton_fit_and_scikit_learn() -> None:
    from sklearn.linear_model import LogisticRegression

    codes, _probs, labels, _ = _data(4)
    sv = cr.soft_votes(codes, None, K)
    correct = np.where(sv.answered, (codes == labels[:, None]).astype(float), np.nan)
    ability, difficulty = cr.rasch(correct, l2=1.0)
    # Dense Newton on the full (m + n) parameter vector [ability, difficulty].
    obs = [(i, j, correct[i, j]) for i in range(N) for j in range(M) if not np.isnan(correct[i, j])]
    x = np.zeros((len(obs), M + N))
    for r, (i, j, _) in enumerate(obs):
        x[r, j], x[r, M + i] = 1.0, -1.0
    y = np.array([c for *_, c in obs])
    w = np.zeros(M + N)
    for _ in range(30):
        p = 1 / (1 + np.exp(-x @ w))
        grad = x.T @ (p - y) + w
        hess = x.T @ (x * (p * (1 - p))[:, None]) + np.eye(M + N)
        w -= np.linalg.solve(hess, grad)
    np.testing.assert_allclose(ability, w[:M], atol=1e-9)
    np.testing.assert_allclose(difficulty, w[M:], atol=1e-9)
    # The same penalised fit by scikit-learn (C = 1 / l2, no intercept), to its tolerance.
    fit = LogisticRegression(C=1.0, fit_intercept=False, tol=1e-10, max_iter=10_000).fit(x, y)
    np.testing.assert_allclose(fit.coef_[0], w, atol=1e-5)


def test_ensemble_distribution_and_its_cleanlab_quality() -> None:
    codes, probs, labels, _ = _data(5)
    sv = cr.soft_votes(codes, probs, K)
    dist = cr.ensemble_distribution(sv)
    for i in range(N):
        given = [v for v in (_vote(codes, probs, i, j) for j in range(M)) if v is not None]
        totals = [sum(v[k] for v in given) + 0.5 for k in range(K)]
        np.testing.assert_allclose(dist[i], np.array(totals) / sum(totals), atol=1e-12)
    np.testing.assert_allclose(
        le.cleanlab_scores(labels, dist),
        1 - get_label_quality_scores(labels, dist, method="normalized_margin"),
        atol=1e-12,
    )
    # Hard answers only: the smoothed vote distribution of the plain cleanlab ranker.
    np.testing.assert_allclose(
        cr.ensemble_distribution(cr.soft_votes(codes, None, K)),
        le.vote_distribution(codes, K),
        atol=1e-12,
    )


def test_crowdlab_with_ensemble_probabilities_is_cleanlabs_posterior() -> None:
    from cleanlab.multiannotator import (
        _get_post_pred_probs_and_weights,
        get_label_quality_multiannotator,
    )

    codes, probs, labels, _ = _data(6)
    codes[:, 0] = np.where(codes[:, 0] < 0, 0, codes[:, 0])  # every item has an option vote
    dist = cr.ensemble_distribution(cr.soft_votes(codes, probs, K))
    scores, _ = le.weighted_consensus_scores(codes, labels, K, dist)
    votes = np.where(codes >= 0, codes, np.nan).astype(float)
    quality = get_label_quality_multiannotator(votes, dist, verbose=False)["label_quality"]
    posterior, _, _ = _get_post_pred_probs_and_weights(
        votes,
        quality["consensus_label"].to_numpy(),
        dist,
        quality["num_annotations"].to_numpy(),
        quality["annotator_agreement"].to_numpy(),
        verbose=False,
    )
    np.testing.assert_allclose(scores, 1 - posterior[np.arange(N), labels], atol=1e-9)
