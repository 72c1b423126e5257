"""Runs that stay alive between calls: ``Simulation`` (one field's run, resident on its
backend) and ``Pipeline`` (fields whose arrays feed each other). Above the API's
pipeline of one call (it uses its stages), below ``vgpu``."""
