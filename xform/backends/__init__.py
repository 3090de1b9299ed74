"""Framework adapters, installed as `xform.backends`: each translates one framework's
autograd and transform protocol onto the core's op table, and holds no math."""
