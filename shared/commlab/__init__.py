"""commlab: codecs, DGC, DDS transport, collectives, data, models and metrics shared by every node."""
