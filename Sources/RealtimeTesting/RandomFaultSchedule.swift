/// A reproducible series of faults for ``FaultProxy/startRandomFaults(_:)``: the same seed gives the
/// same faults at the same offsets from the start (``plan()``), so a failing run can be replayed.
///
/// ```swift
/// proxy.startRandomFaults(RandomFaultSchedule(seed: 7, count: 20, interval: .milliseconds(50) ... .milliseconds(300)))
/// ```
public struct RandomFaultSchedule: Sendable, Hashable {
    /// What the schedule draws from.
    public enum Kind: Sendable, Hashable {
        /// Cut every connection with FIN.
        case cutFIN
        /// Cut every connection with RST.
        case cutReset
        /// Cut after a number of bytes drawn from the range, in both directions.
        case cutAfterBytes(ClosedRange<Int>)
        /// Stall both directions for a duration drawn from the range.
        case stall(ClosedRange<Duration>)
        /// Delay both directions by `latency` for a duration drawn from the range.
        case latency(Duration, ClosedRange<Duration>)
        /// Refuse new connections for a duration drawn from the range.
        case refuse(ClosedRange<Duration>)
    }

    /// The seed: the same seed gives the same faults at the same offsets.
    public var seed: UInt64
    /// How many faults to apply.
    public var count: Int
    /// The time between two faults is drawn from this range.
    public var interval: ClosedRange<Duration>
    /// The kinds of fault drawn from.
    public var kinds: [Kind]

    /// Makes a schedule; every parameter is the property of the same name.
    public init(
        seed: UInt64,
        count: Int = 10,
        interval: ClosedRange<Duration> = .milliseconds(50) ... .milliseconds(500),
        kinds: [Kind] = [.cutFIN, .cutReset, .stall(.milliseconds(50) ... .milliseconds(300))]
    ) {
        self.seed = seed
        self.count = count
        self.interval = interval
        self.kinds = kinds
    }

    /// The faults and when they happen, as offsets from the start of the schedule.
    public func plan() -> [(at: Duration, fault: FaultProxy.Fault)] {
        guard !kinds.isEmpty else { return [] }
        var random = SplitMix64(seed: seed)
        var at = Duration.zero
        return (0..<max(count, 0)).map { _ in
            at += random.duration(in: interval)
            let fault: FaultProxy.Fault =
                switch kinds[Int(random.next() % UInt64(kinds.count))] {
                case .cutFIN: .cut(.fin)
                case .cutReset: .cut(.reset)
                case .cutAfterBytes(let range): .cutAfter(bytes: random.int(in: range), .both, .fin)
                case .stall(let range): .stall(.both, for: random.duration(in: range))
                case .latency(let latency, let range): .latency(latency, .both, for: random.duration(in: range))
                case .refuse(let range): .refuse(for: random.duration(in: range))
                }
            return (at, fault)
        }
    }
}

/// SplitMix64 (Steele, Lea and Flood): small, fast, and the same on every platform, so a seeded
/// schedule or a seeded random test input can be found again.
public struct SplitMix64: RandomNumberGenerator, Sendable {
    private var state: UInt64

    /// Makes a generator whose sequence is fixed by `seed`.
    public init(seed: UInt64) { state = seed }

    /// The next number of the sequence.
    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    mutating func int(in range: ClosedRange<Int>) -> Int {
        let span = UInt64(range.upperBound - range.lowerBound) &+ 1
        return span == 0 ? Int(bitPattern: UInt(next())) : range.lowerBound + Int(next() % span)
    }

    mutating func duration(in range: ClosedRange<Duration>) -> Duration {
        let low = range.lowerBound.nanoseconds, high = range.upperBound.nanoseconds
        return .nanoseconds(low + Int64(next() % UInt64(high - low + 1)))
    }
}

extension Duration {
    var nanoseconds: Int64 { components.seconds * 1_000_000_000 + components.attoseconds / 1_000_000_000 }
}
