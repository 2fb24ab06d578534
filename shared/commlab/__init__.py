"""commlab: codecs, DDS transport, FL and DDP, data, models, runs, links and run output shared by every node."""
