"""Reference peers that run on the testbed's own links beside the DDS nodes (docs/peers.md):
`gloo` (torch DistributedDataParallel over gloo, hooks none|fp16|powersgd) and `centralized`
(one process on the union of the workers' data: the accuracy ceiling)."""
