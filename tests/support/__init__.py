"""Helpers shared by the test folders: factories, live servers, form and route support."""
