"""Hooks on the user's model for the Explorer: activations, gradients, attention, parameters and
the step clock, attached and removed together for one selection."""
