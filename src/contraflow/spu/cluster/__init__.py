"""The SPU cluster: a controller (`contraflow sc run`) and SPUs that replicate each
partition from its leader to its followers (see docs/spu-cluster.md)."""
