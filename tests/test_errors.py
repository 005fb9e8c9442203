from dvsdk.errors import DeviceTimeout, InvalidCommand, LayoutError


def test_message_names_field_value_limit():
    e = InvalidCommand("kernel too large", run=2, field="p.kx", value=8, limit="1..7")
    assert str(e) == "kernel too large (field=run[2].p.kx, value=8, limit=1..7)"
    assert e.run == 2 and e.value == 8 and e.exit_code == 2
    assert isinstance(e, ValueError)


def test_device_errors_exit_3():
    assert DeviceTimeout("no irq", registers={"0x420": 0}).exit_code == 3
    assert LayoutError("x").exit_code == 2
