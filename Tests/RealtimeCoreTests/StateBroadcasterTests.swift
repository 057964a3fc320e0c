import RealtimeCore
import Testing

@Suite struct StateBroadcasterTests {
    @Test func observersGetTheCurrentValueThenEveryChange() async {
        let states = StateBroadcaster<ConnectionState>(.connecting)
        let first = states.updates()
        states.update(.connected)
        let second = states.updates()
        states.update(.reconnecting(attempt: 1))
        states.update(.disconnected(nil))
        states.finish()
        var seenFirst: [ConnectionState] = []
        for await state in first { seenFirst.append(state) }
        var seenSecond: [ConnectionState] = []
        for await state in second { seenSecond.append(state) }
        #expect(seenFirst == [.connecting, .connected, .reconnecting(attempt: 1), .disconnected(nil)])
        #expect(seenSecond == [.connected, .reconnecting(attempt: 1), .disconnected(nil)])
        #expect(states.current == .disconnected(nil))
    }

    @Test func afterFinishNewObserversSeeTheLastValueAndEnd() async {
        let states = StateBroadcaster(1)
        states.update(2)
        states.finish()
        var values: [Int] = []
        for await value in states.updates() { values.append(value) }
        #expect(values == [2])
    }
}
