"""Token-mixer layers and their naive references (a kernel's reference sits beside it)."""
