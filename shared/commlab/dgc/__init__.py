"""Deep Gradient Compression (Lin et al., ICLR 2018): warm-up, sampled top-k, momentum-corrected
memory, local clipping, and the wire frame one rank sends per step."""
from commlab.dgc.compressor import DgcCompressor
from commlab.dgc.frame import FrameError
from commlab.dgc.memory import DgcMemory
from commlab.dgc.warmup import Warmup

__all__ = ["DgcCompressor", "DgcMemory", "FrameError", "Warmup"]
