"""The bottom layer: the cffi handle to the native core, the error classes,
logging, dtypes, device-library lookup, the records a rank leaves for
fuseoptrun, and small pure helpers. Nothing here imports from above it, and
importing it has no side effect beyond loading the native library."""
