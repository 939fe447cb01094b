"""Warehouse table schemas (pyarrow), and the errors no retry can fix; imports nothing of ours.

The config and flow-parameter models live beside the code they parameterise and in
``flows/config.py``.
"""
