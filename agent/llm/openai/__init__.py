"""The OpenAI chat completions adapter (OpenAI itself or any compatible server).

``model`` is the adapter and its SDK client; ``wire`` maps our messages to the
request body and the answer back.
"""
