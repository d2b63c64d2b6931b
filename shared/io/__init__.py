"""Files: atomic writes that leave nothing partial behind, safetensors in numpy, and every file format
`rosetta port` reads and writes."""
