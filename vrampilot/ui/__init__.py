"""The desktop app: a thin PySide6 layer over the Qt-free core. Nothing here computes a plan or a
byte count; long work runs on worker threads and reports by signals."""
