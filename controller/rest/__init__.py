"""The controller's REST admin API and web console (docs/rest.md): ``api`` (routes over the services),
``openapi`` (its OpenAPI document), ``server`` (the HTTP listener), ``console/`` (static page + script)."""
