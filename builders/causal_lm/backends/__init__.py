"""Engine backends behind one interface: `build(request, writer, options)`."""
