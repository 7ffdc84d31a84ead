"""llama.cpp's own answer: a configuration loaded with no_alloc (allocations simulated, as its
--fit does) and the buffer sizes its log prints, the ground truth the memory model is held to."""
