"""Black-box adversarial attack benchmark (``python -m benchmarks attack``).

Modules: :mod:`data` (MNIST 5k subset, full MNIST, CIFAR-10 loaders), :mod:`models`
(flax NNX target CNNs), :mod:`train` (seeded training, checksummed weight cache),
:mod:`objective` (box constraint, margin loss, success), :mod:`methods` (the optimizers
compared, specs of :mod:`benchmarks.methods`), :mod:`runner` (many attacks as one vmapped
program), :mod:`protocol` (the config, its presets, and which images and seeds),
:mod:`experiment` (``run(config, method)``, the units of a run on the worker pool, records
and run entries), :mod:`results` (merging runs, summaries, anytime regret), :mod:`report`
(figures, Markdown) and the thin :mod:`cli`.
"""
