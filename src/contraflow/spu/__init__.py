"""The SPU: a segmented, indexed, crash-safe log (storage), its server and its clients."""
