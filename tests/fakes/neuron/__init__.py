"""A fake ``neuron-monitor`` (an executable script) and a fake Neuron sysfs tree."""
