"""Pure core: schema, encoding, framing, naming, planning and the manifest. Imports neither Beam nor storage."""
