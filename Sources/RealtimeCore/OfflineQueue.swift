public import DequeModule

/// What an ``OfflineQueue`` does when it is full.
public struct OverflowPolicy: Hashable, Sendable {
    enum Base: Hashable, Sendable {
        case rejectNewest
        case dropOldest
    }
    let base: Base

    /// The new element is refused and the caller gets ``RealtimeError/Code/queueFull``.
    public static let rejectNewest = OverflowPolicy(base: .rejectNewest)
    /// The oldest element is removed to make room and handed back to the caller to report.
    public static let dropOldest = OverflowPolicy(base: .dropOldest)
}

/// A FIFO of messages sent while disconnected, flushed in order after reconnecting.
///
/// A value type: the owner decides what to do with each ``EnqueueResult``; nothing is dropped
/// without the caller being told.
public struct OfflineQueue<Element> {
    /// What ``enqueue(_:)`` did.
    public enum EnqueueResult {
        /// Queued.
        case enqueued
        /// The queue was full and the policy is ``OverflowPolicy/rejectNewest``: the element was not stored.
        case rejected(Element)
        /// The queue was full and the policy is ``OverflowPolicy/dropOldest``: this element was removed.
        case droppedOldest(Element)
    }

    /// How many elements the queue keeps.
    public let capacity: Int
    /// What an enqueue does when the queue is full.
    public let overflowPolicy: OverflowPolicy
    private var storage: Deque<Element> = []

    /// - Parameters:
    ///   - capacity: how many elements are kept; 100 by default, at least 0.
    ///   - overflowPolicy: what an enqueue does when the queue is full.
    public init(capacity: Int = 100, overflowPolicy: OverflowPolicy = .rejectNewest) {
        self.capacity = Swift.max(0, capacity)
        self.overflowPolicy = overflowPolicy
    }

    /// The number of queued elements.
    public var count: Int { storage.count }
    /// Whether nothing is queued.
    public var isEmpty: Bool { storage.isEmpty }

    /// Adds `element` at the end, or applies the overflow policy when the queue is full.
    public mutating func enqueue(_ element: Element) -> EnqueueResult {
        if storage.count < capacity {
            storage.append(element)
            return .enqueued
        }
        switch overflowPolicy.base {
        case .rejectNewest:
            return .rejected(element)
        case .dropOldest:
            guard let oldest = storage.popFirst() else { return .rejected(element) }
            storage.append(element)
            return .droppedOldest(oldest)
        }
    }

    /// Removes and returns the oldest element.
    public mutating func dequeue() -> Element? { storage.popFirst() }

    /// Puts an element back at the front, for a flush that failed part-way.
    public mutating func requeueFront(_ element: Element) { storage.prepend(element) }

    /// Removes and returns every element, oldest first.
    public mutating func drain() -> [Element] {
        defer { storage.removeAll() }
        return storage.arrayOfElements
    }
}

extension OfflineQueue: Sendable where Element: Sendable {}

extension OfflineQueue: Sequence {
    /// The elements, oldest first.
    public func makeIterator() -> Deque<Element>.Iterator { storage.makeIterator() }
}

extension Deque {
    /// The elements as an array. An empty deque gives `[]` without copying: the standard library's
    /// copy of zero elements writes a zero into the shared empty-array storage, which
    /// ThreadSanitizer reports as a data race whenever two threads do it (the value never changes,
    /// but every TSan run of the suite listed it from Socket.IO's and the outbox's session ends).
    package var arrayOfElements: [Element] { isEmpty ? [] : Array(self) }
}
