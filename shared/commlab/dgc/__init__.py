"""Deep Gradient Compression (Lin et al., ICLR 2018), one concept per module:
warmup (density schedule), sparsify (sampled top-k), memory (momentum correction, accumulation,
masking), clipping (local clipping), frame (the wire frame a rank sends per step), compressor
(all of it for a whole model). Import from the modules; this package imports nothing heavy."""
