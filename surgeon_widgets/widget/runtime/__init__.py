"""Where the Explorer meets its host process: kernel comms and threads, the hand-over to the
model's thread, torch.compile and dynamo, ownership of a model. Every private ipykernel, dynamo
and traitlets API the widget uses is looked up here, each with a tested fallback."""
