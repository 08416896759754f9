"""`python -m transformers_responses`: the host CLI with the plugin registered (see `activation.main`)."""

from transformers_responses.activation import main

main()
