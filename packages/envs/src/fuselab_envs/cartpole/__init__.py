"""The cart-pole model (see cartpole.xml)."""

from pathlib import Path

CARTPOLE_XML_PATH = Path(__file__).with_name("cartpole.xml")
