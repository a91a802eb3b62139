"""The product layer: what a release engineer touches around the engine.

The command line (``cli``), the TOML configuration (``config``, ``config_constraints``), the
release folder and its checks (``release_folder``, ``output_claim``) and the HTML report
(``report``). The engine (``topdown.engine`` and the modules it calls) knows nothing of them;
they call the engine.
"""
