"""``python -m loadgen``: the same CLI as the ``loadgen`` command."""

from loadgen.cli import app

if __name__ == "__main__":
    app(prog_name="loadgen")
