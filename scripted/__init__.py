"""Export of the fusedops drop-in models to TorchScript (see export.py)."""
