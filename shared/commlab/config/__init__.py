"""Node configs: the typed sections checked field by field (`schema`) and the objects they name
(`builders`: dataset, model, DDS settings)."""
