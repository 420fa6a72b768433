"""Hooks on the user's model for the Explorer: activations, gradients, attention, parameters and
the step clock, attached and removed together for one selection (:mod:`.selection`), on one
throttle (:mod:`.throttle`), with one failure path (:mod:`.failures`)."""
