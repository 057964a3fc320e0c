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

    /// The memory promise: an observer that never reads holds at most `bufferSize` values, the newest
    /// ones, however many changes happen (a connection that reconnects for days).
    @Test func anObserverThatNeverReadsHoldsAtMostBufferSizeValues() async {
        let states = StateBroadcaster(0)
        let idle = states.updates(bufferSize: 8)
        let defaulted = states.updates()
        for value in 1...10_000 { states.update(value) }
        states.finish()
        var held: [Int] = []
        for await value in idle { held.append(value) }
        #expect(held == Array(9_993...10_000), "the 8 newest, ending with the current value")
        var heldByDefault = 0
        var last = -1
        for await value in defaulted {
            heldByDefault += 1
            last = value
        }
        #expect(heldByDefault == StateBroadcaster<Int>.defaultBufferSize)
        #expect(last == 10_000)
    }
}
