"""Tokens to text and back, the llguidance grammar constraint, and sampling."""
