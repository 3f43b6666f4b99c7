"""Disentanglers: target embeddings -> condition for the adapters + named losses."""
