"""Ways to run loopworks: the embedded local stack, and the files for compose and Kubernetes."""
