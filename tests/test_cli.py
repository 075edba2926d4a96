from importlib.metadata import version

from tools.cli import main


def test_version_prints_installed_version(capsys):
    assert main(["version"]) == 0
    assert capsys.readouterr().out.strip() == version("ksp-gateway")
