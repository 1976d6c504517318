"""The driver IR every backend shares: what runs in which order and where each value lives
(`schedule.py`, over `buffers.py`'s analysis and `views.py`'s in-place slices), buffer
assignment (`assign.py`), and the kernel contract between a lowering and a driver
(`kernel.py`). Printers of it: the cpu backend's C driver (`cpu/driver.py`) and the gpu
backend's launcher (`gpu/driver.py`)."""
