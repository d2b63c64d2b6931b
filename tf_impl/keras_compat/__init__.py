"""What Keras needs to compute exactly what PyTorch computes, with no torch counterpart: recurrent cells with
torch's two biases, torch's Adam rule and clipping, the differences between Keras's backends, and the `.keras`
file's config."""
