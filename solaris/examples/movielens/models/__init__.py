"""The MovieLens example's models: the multi-task foundation model (:mod:`.fm`), the
vertical model that reads its codes (:mod:`.vm`), the feature batches both read
(:mod:`.batch`) and their training loop (:mod:`.training`).

The product needs none of them: it reaches an FM and a VM only through the adapters
(``solaris.adapters``); the autoencoder and checkpoints every FM shares are
``solaris.models``.
"""

__all__: list[str] = []
