// Values the IKEventSource parity checks work on (Tests/CompatParity/IKEventSource.tsv).
func aSource() -> EventSource { fatalError() }
func aURL() -> URL { fatalError() }
func aProtocolSource() -> any EventSourceProtocol { fatalError() }
