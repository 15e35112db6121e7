"""Black-box adversarial attack benchmark (``python -m benchmarks attack``).

Modules: :mod:`data` (MNIST 5k subset, full MNIST, CIFAR-10 loaders), :mod:`models`
(flax NNX target CNNs), :mod:`train` (seeded training, checksummed weight cache),
:mod:`objective` (box constraint, margin loss, success), :mod:`methods` (the optimizers
compared), :mod:`runner` (many attacks as one vmapped program), :mod:`workers`
(core-pinned processes), :mod:`protocol` (which images and seeds), :mod:`report`
(results file, figures, Markdown) and :mod:`cli`.
"""
