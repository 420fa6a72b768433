"""Where the Explorer meets its host process: kernel comms and threads, the hand-over to the
model's thread (and traitlets' dispatch into it), torch.compile and dynamo, the comm opened when
shown, the notebook's shell, ownership of a model. Every private ipykernel, dynamo, traitlets
and ipywidgets API the widget uses is looked up here, each with a tested fallback."""
