"""trainbox: train LibreYOLO on a rented GPU without losing money or checkpoints."""

__version__ = "0.1.0"
