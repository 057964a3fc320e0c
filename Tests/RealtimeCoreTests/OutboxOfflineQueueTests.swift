@_spi(RealtimeEngine) import RealtimeCore
import Testing

/// The outbox as an offline queue: its capacity and overflow policy, the flush into a connection,
/// and what it takes back at a cut (which messages it keeps, which it drops and names).
@Suite struct OutboxOfflineQueueTests {
    typealias Message = OutboxTests.Message

    static func ids(_ outbox: Outbox<Message>) -> [Int] {
        var ids: [Int] = []
        outbox.forEachQueued { ids.append($0.id) }
        return ids
    }

    @Test func atCapacityTheNewestIsRefusedAndHandedBack() {
        let queue = Outbox<Message>(capacity: 100)
        for id in 0..<100 {
            guard case .queued = queue.pushCounted(Message(id: id)) else { Issue.record("not queued: \(id)"); return }
        }
        guard case .rejected(let refused) = queue.pushCounted(Message(id: 100)) else { Issue.record("expected a refusal"); return }
        #expect(refused.id == 100)
        #expect(Self.ids(queue) == Array(0..<100))
    }

    @Test func dropOldestHandsBackTheDroppedMessage() {
        let queue = Outbox<Message>(capacity: 2, overflow: .dropOldest)
        _ = queue.pushCounted(Message(id: 1))
        _ = queue.pushCounted(Message(id: 2))
        guard case .droppedOldest(let dropped) = queue.pushCounted(Message(id: 3)) else { Issue.record("expected a drop"); return }
        #expect(dropped.id == 1)
        #expect(Self.ids(queue) == [2, 3])
    }

    @Test func zeroCapacityRefusesEverything() {
        let queue = Outbox<Message>(capacity: 0, overflow: .dropOldest)
        guard case .rejected = queue.pushCounted(Message(id: 1)) else { Issue.record("expected a refusal"); return }
        #expect(queue.isEmpty)
    }

    /// A flush hands what waits to a connection's outbox and puts back, in order, what it could not.
    @Test func aFlushThatStopsPartWayKeepsTheOrder() {
        let queue = Outbox<Message>(capacity: 10)
        for id in 1...5 { _ = queue.pushCounted(Message(id: id)) }
        let taken = queue.takeQueued()
        #expect(taken.map(\.id) == [1, 2, 3, 4, 5])
        #expect(queue.isEmpty)
        _ = queue.pushCounted(Message(id: 6))  // made while the flush ran
        queue.requeueFront(Array(taken[2...]))
        #expect(Self.ids(queue) == [3, 4, 5, 6])
    }

    /// Everything fits: the written first (they may not have arrived, and go out again in their
    /// order), then the unwritten, then what waited already.
    @Test func takeBackPutsWrittenThenUnwrittenThenQueued() {
        let queue = Outbox<Message>(capacity: 10)
        _ = queue.pushCounted(Message(id: 9))
        let dropped = queue.takeBack(written: [Message(id: 1), Message(id: 2)], unwritten: [Message(id: 5)])
        #expect(dropped.isEmpty)
        #expect(Self.ids(queue) == [1, 2, 5, 9])
    }

    /// The case the old take-back got wrong: 300 emits written and unconfirmed at a cut, 100 more
    /// never written, capacity 100. The written ones are the likeliest to have arrived, so they go
    /// first; the 100 never written are kept, and every dropped message is named.
    @Test func pastCapacityTheWrittenGoFirstThenThePolicyChooses() {
        let written = (0..<300).map { Message(id: $0) }
        let unwritten = (300..<400).map { Message(id: $0) }
        for policy in [OverflowPolicy.rejectNewest, .dropOldest] {
            let queue = Outbox<Message>(capacity: 100, overflow: policy)
            let dropped = queue.takeBack(written: written, unwritten: unwritten)
            #expect(dropped.map(\.id) == Array(0..<300), "\(policy)")
            #expect(Self.ids(queue) == Array(300..<400), "\(policy)")
        }
        // Among the never-written, the policy decides.
        let newest = Outbox<Message>(capacity: 2)
        #expect(newest.takeBack(written: [Message(id: 0)], unwritten: (1...3).map { Message(id: $0) }).map(\.id) == [0, 3])
        #expect(Self.ids(newest) == [1, 2])
        let oldest = Outbox<Message>(capacity: 2, overflow: .dropOldest)
        #expect(oldest.takeBack(written: [Message(id: 0)], unwritten: (1...3).map { Message(id: $0) }).map(\.id) == [0, 1])
        #expect(Self.ids(oldest) == [2, 3])
    }

    /// Written messages that fit stay: only as many as must go are dropped, the oldest first.
    @Test func onlyTheOverflowOfTheWrittenIsDropped() {
        let queue = Outbox<Message>(capacity: 5)
        _ = queue.pushCounted(Message(id: 9))
        let dropped = queue.takeBack(written: (1...3).map { Message(id: $0) }, unwritten: [Message(id: 4), Message(id: 5)])
        #expect(dropped.map(\.id) == [1])
        #expect(Self.ids(queue) == [2, 3, 4, 5, 9])
    }
}
