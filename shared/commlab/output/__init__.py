"""What a run writes: its folder with the manifest and append-only CSV tables (`run_folder`), the
tables' columns (`tables`), self-checking files for checkpoints (`checksummed`) and the progress
line on the terminal (`progress`)."""
