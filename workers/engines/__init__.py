"""The torch engines: model loading, residual capture, judging, activations, remote judges."""
