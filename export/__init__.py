"""vitdeploy's shipped export recipes (one TOML file per model variant), installed as the data package
``vitdeploy._recipes`` so a wheel carries them (see setup.py); read by vitdeploy.models.recipes."""
