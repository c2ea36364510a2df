"""Exporting trained models as packages that ESPnet's own ``Speech2Text`` loads."""
