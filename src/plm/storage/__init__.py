"""What plm keeps on disk.

Model directories and training checkpoints (atomic, safetensors with checksums), FSDP's sharded
checkpoints, and the Hub's files. Opening any model directory, plm's or Hugging Face's, with its
tokenizer is [`plm.loading`][plm.loading]'s, a layer above this one, the Hugging Face formats and the tokenizers.
"""
