"""GPU memory backends (NVML, amdsmi, sysfs, a scripted fake) and the sampler that reads them fast."""
