import RealtimeCore
import Testing

@Suite struct OfflineQueueTests {
    @Test func defaultCapacityIs100AndRejectsTheNewest() {
        var queue = OfflineQueue<Int>()
        #expect(queue.capacity == 100)
        for value in 0..<100 {
            guard case .enqueued = queue.enqueue(value) else { Issue.record("not enqueued"); return }
        }
        guard case .rejected(let rejected) = queue.enqueue(100) else { Issue.record("expected rejection"); return }
        #expect(rejected == 100)
        #expect(queue.drain() == Array(0..<100))
        #expect(queue.isEmpty)
    }

    @Test func dropOldestHandsBackTheDroppedElement() {
        var queue = OfflineQueue<String>(capacity: 2, overflowPolicy: .dropOldest)
        _ = queue.enqueue("a")
        _ = queue.enqueue("b")
        guard case .droppedOldest(let dropped) = queue.enqueue("c") else { Issue.record("expected drop"); return }
        #expect(dropped == "a")
        #expect(queue.drain() == ["b", "c"])
    }

    @Test func requeueFrontKeepsOrderAfterAFailedFlush() {
        var queue = OfflineQueue<Int>(capacity: 5)
        for value in 1...3 { _ = queue.enqueue(value) }
        let first = queue.dequeue()!
        queue.requeueFront(first)
        #expect(queue.drain() == [1, 2, 3])
    }

    @Test func zeroCapacityRejectsEverything() {
        var queue = OfflineQueue<Int>(capacity: 0)
        guard case .rejected = queue.enqueue(1) else { Issue.record("expected rejection"); return }
    }
}
