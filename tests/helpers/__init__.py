"""What the test modules share (imported as ``helpers`` from tests/, which pytest puts on
sys.path): the CLI runner, the wire-probe harness, the tracer-version rows. No test
module imports another."""
