"""Code the tests share."""
