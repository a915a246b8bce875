"""Framework-neutral training policy shared by the bindings: compression,
gradient buckets, local SGD, negotiation names, optimizer arguments,
checkpoints and the elastic state protocol."""
