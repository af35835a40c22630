"""What plm keeps on disk.

Model directories and training checkpoints (atomic, safetensors with checksums), FSDP's sharded
checkpoints, and opening any model directory, plm's or Hugging Face's, with its tokenizer.
"""
