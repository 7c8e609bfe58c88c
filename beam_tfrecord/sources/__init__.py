"""Sources: PTransforms that turn raw inputs into ``Sample``s with stable keys."""
