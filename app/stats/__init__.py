"""Pure numerics (numpy, scikit-learn): metrics, bootstrap, probes and disagreements."""
